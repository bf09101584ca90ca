package ec2fake

import (
	"encoding/json"
	"strings"
)

// logsAuthorizations are what a CloudWatch Logs request needs allowed (R68), as the Service Authorization
// Reference lists them ("Actions, resources, and condition keys for Amazon CloudWatch Logs": the resource
// types log-group, arn:aws:logs:<region>:<account>:log-group:<name>, and log-stream,
// arn:aws:logs:<region>:<account>:log-group:<name>:log-stream:<stream>):
//
//   - CreateLogGroup, PutRetentionPolicy, DeleteLogGroup, TagResource and ListTagsForResource: their action on
//     the group, with its tags as aws:ResourceTag/<key> when it exists and the tags a request adds as
//     aws:RequestTag/<key>; a CreateLogGroup with tags also needs logs:TagResource on it (CreateLogGroup,
//     tags: "To assign tags when you create a log group, you must have either the logs:TagResource or
//     logs:TagLogGroup permission"; the fake takes logs:TagResource).
//   - CreateLogStream, PutLogEvents and GetLogEvents: their action on the stream.
//   - DescribeLogGroups: on arn:aws:logs:<region>:<account>:log-group:*, any group of the region.
func (s *Server) logsAuthorizations(rg *region, c *call) []authzRequest {
	var in struct {
		LogGroupName, LogStreamName, ResourceArn string
		Tags                                     map[string]string
	}
	_ = json.Unmarshal(c.body, &in) // a body that does not parse is refused by the action itself
	base := s.baseContext(c)
	if c.action == "DescribeLogGroups" {
		return []authzRequest{{action: "logs:DescribeLogGroups", resource: s.logGroupARN(rg, "*"), ctx: base}}
	}
	group := in.LogGroupName
	if in.ResourceArn != "" {
		group = strings.TrimPrefix(in.ResourceArn, s.logGroupARN(rg, ""))
	}
	ctx := base
	if g := rg.logGroups[group]; g != nil {
		ctx.tags = g.tags
	}
	if len(in.Tags) > 0 {
		ctx.requestTags = in.Tags
	}
	switch c.action {
	case "CreateLogStream", "PutLogEvents", "GetLogEvents":
		return []authzRequest{{action: "logs:" + c.action, resource: s.logStreamARN(rg, group, in.LogStreamName), ctx: ctx}}
	case "CreateLogGroup":
		reqs := []authzRequest{{action: "logs:CreateLogGroup", resource: s.logGroupARN(rg, group), ctx: ctx}}
		if len(in.Tags) > 0 {
			reqs = append(reqs, authzRequest{action: "logs:TagResource", resource: s.logGroupARN(rg, group), ctx: ctx})
		}
		return reqs
	}
	return []authzRequest{{action: "logs:" + c.action, resource: s.logGroupARN(rg, group), ctx: ctx}}
}
